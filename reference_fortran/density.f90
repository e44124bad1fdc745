! pompy Fortran oracle: equation of state and baroclinic pressure gradient.

subroutine dens(im, jm, kb, grav, rhoref, tbias, sbias, zz, h, fsm, si, ti, rhoo)
  ! pom2k dens: density anomaly (rho-1000)/rhoref from UNESCO with the
  ! pressure correction; written for k=1..kbm1, masked by fsm.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: grav, rhoref, tbias, sbias
  real(8), intent(in) :: zz(kb), h(im,jm), fsm(im,jm)
  real(8), intent(in) :: si(im,jm,kb), ti(im,jm,kb)
  real(8), intent(inout) :: rhoo(im,jm,kb)
  real(8) :: cr, p, rhor, sr, tr, tr2, tr3, tr4
  integer :: i, j, k

  do k = 1, kb-1
    do j = 1, jm
      do i = 1, im
        tr = ti(i,j,k) + tbias
        sr = si(i,j,k) + sbias
        tr2 = tr*tr
        tr3 = tr2*tr
        tr4 = tr3*tr
        ! approximate pressure in bars
        p = grav*rhoref*(-zz(k)*h(i,j))*1.d-5
        rhor = -0.157406d0 + 6.793952d-2*tr - 9.095290d-3*tr2 &
               + 1.001685d-4*tr3 - 1.120083d-6*tr4 + 6.536332d-9*tr4*tr
        rhor = rhor + (0.824493d0 - 4.0899d-3*tr + 7.6438d-5*tr2 &
                       - 8.2467d-7*tr3 + 5.3875d-9*tr4)*sr &
               + (-5.72466d-3 + 1.0227d-4*tr - 1.6546d-6*tr2)*abs(sr)**1.5d0 &
               + 4.8314d-4*sr*sr
        cr = 1449.1d0 + .0821d0*p + 4.55d0*tr - .045d0*tr2 + 1.34d0*(sr - 35.d0)
        rhor = rhor + 1.d5*p/(cr*cr)*(1.d0 - 2.d0*p/(cr*cr))
        rhoo(i,j,k) = rhor/rhoref*fsm(i,j)
      end do
    end do
  end do
end subroutine dens


subroutine baropg(im, jm, kb, grav, zz, dx, dy, dt, dum, dvm, rmean, rho, drhox, drhoy)
  ! pom2k baropg: baroclinic pressure gradient, integrated from the
  ! surface, of rho-rmean; rho is restored on exit.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: grav, zz(kb)
  real(8), intent(in) :: dx(im,jm), dy(im,jm), dt(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(in) :: rmean(im,jm,kb)
  real(8), intent(inout) :: rho(im,jm,kb), drhox(im,jm,kb), drhoy(im,jm,kb)
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        rho(i,j,k) = rho(i,j,k) - rmean(i,j,k)
      end do
    end do
  end do
  ! x-component
  do j = 2, jmm1
    do i = 2, imm1
      drhox(i,j,1) = .5d0*grav*(-zz(1))*(dt(i,j) + dt(i-1,j)) &
                     *(rho(i,j,1) - rho(i-1,j,1))
    end do
  end do
  do k = 2, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        drhox(i,j,k) = drhox(i,j,k-1) &
                       + grav*.25d0*(zz(k-1) - zz(k))*(dt(i,j) + dt(i-1,j)) &
                         *(rho(i,j,k) - rho(i-1,j,k) + rho(i,j,k-1) - rho(i-1,j,k-1)) &
                       + grav*.25d0*(zz(k-1) + zz(k))*(dt(i,j) - dt(i-1,j)) &
                         *(rho(i,j,k) + rho(i-1,j,k) - rho(i,j,k-1) - rho(i-1,j,k-1))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        drhox(i,j,k) = .25d0*(dt(i,j) + dt(i-1,j))*drhox(i,j,k)*dum(i,j) &
                       *(dy(i,j) + dy(i-1,j))
      end do
    end do
  end do
  ! y-component
  do j = 2, jmm1
    do i = 2, imm1
      drhoy(i,j,1) = .5d0*grav*(-zz(1))*(dt(i,j) + dt(i,j-1)) &
                     *(rho(i,j,1) - rho(i,j-1,1))
    end do
  end do
  do k = 2, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        drhoy(i,j,k) = drhoy(i,j,k-1) &
                       + grav*.25d0*(zz(k-1) - zz(k))*(dt(i,j) + dt(i,j-1)) &
                         *(rho(i,j,k) - rho(i,j-1,k) + rho(i,j,k-1) - rho(i,j-1,k-1)) &
                       + grav*.25d0*(zz(k-1) + zz(k))*(dt(i,j) - dt(i,j-1)) &
                         *(rho(i,j,k) + rho(i,j-1,k) - rho(i,j,k-1) - rho(i,j-1,k-1))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        drhoy(i,j,k) = .25d0*(dt(i,j) + dt(i,j-1))*drhoy(i,j,k)*dvm(i,j) &
                       *(dx(i,j) + dx(i,j-1))
      end do
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        rho(i,j,k) = rho(i,j,k) + rmean(i,j,k)
      end do
    end do
  end do
end subroutine baropg

